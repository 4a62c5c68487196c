; BeeBot grid client for Windows: the Inno Setup script of its installer.
; It installs beebot.exe for the user who runs it (no administrator rights),
; adds "BeeBot" to the Start menu (it opens the status page), registers the
; logon task (`beebot service install`) and opens the page, where the
; employee pastes the invite code. Uninstalling removes the task.
;
; Build, on Windows with Rust and Inno Setup 6:
;   cargo build --release --locked -p beebot-client
;   iscc /DAppVersion=0.1.0 deploy\windows\beebot.iss
; which writes target\installer\beebot-setup-0.1.0.exe.
;
; IT's mass deployment (e.g. a logon script), silent, joining by itself:
;   beebot-setup-0.1.0.exe /VERYSILENT /SUPPRESSMSGBOXES /INVITE=beebot2-...
; The code is written next to beebot.exe ({app}\invite, in the user's own
; install directory: not %ProgramData%, where any user could plant one),
; where the client finds it while it has not joined yet.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif

[Setup]
AppId={{6D1B8E2C-4F0A-4B7E-9C3D-BEEB0700C11E}
AppName=BeeBot
AppVersion={#AppVersion}
AppPublisher=BeeBot grid
AppComments=Crawls research websites for a link graph while the computer is idle
DefaultDirName={userpf}\BeeBot
DefaultGroupName=BeeBot
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
OutputDir=..\..\target\installer
OutputBaseFilename=beebot-setup-{#AppVersion}
Compression=lzma2
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
UninstallDisplayIcon={app}\beebot.exe
WizardStyle=modern
CloseApplications=yes

[Files]
Source: "..\..\target\release\beebot.exe"; DestDir: "{app}"; Flags: ignoreversion
Source: "..\..\README.md"; DestDir: "{app}"; DestName: "README.txt"; Flags: ignoreversion

[Icons]
Name: "{userprograms}\BeeBot"; Filename: "{app}\beebot.exe"; Parameters: "open"; Comment: "See and steer the BeeBot grid client"

[Run]
Filename: "{app}\beebot.exe"; Parameters: "service install"; Flags: runhidden waituntilterminated; StatusMsg: "Registering BeeBot to start at logon..."
Filename: "{app}\beebot.exe"; Parameters: "open"; Flags: postinstall nowait skipifsilent runhidden; Description: "Open BeeBot"

[UninstallRun]
Filename: "{app}\beebot.exe"; Parameters: "service uninstall"; Flags: runhidden waituntilterminated; RunOnceId: "BeeBotLogonTask"

[Code]
{ The /INVITE=CODE of a silent install, kept where the client looks:
  written before the [Run] entries start the client. }
procedure CurStepChanged(CurStep: TSetupStep);
var
  Code, Dir: String;
begin
  Code := Trim(ExpandConstant('{param:INVITE|}'));
  if (CurStep = ssInstall) and (Code <> '') then
  begin
    Dir := ExpandConstant('{app}');
    ForceDirectories(Dir);
    SaveStringToFile(Dir + '\invite', Code + #13#10, False);
  end;
end;
